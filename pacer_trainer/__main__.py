import sys

from pacer_trainer.cli import main

sys.exit(main())
