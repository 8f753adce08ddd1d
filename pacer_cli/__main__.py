import sys

from pacer_cli.main import main

sys.exit(main())
