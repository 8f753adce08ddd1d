"""The pacer command's exit status: 0 done, 1 the API refused (its field errors are printed),
2 bad usage, 3 the server could not be reached or the websocket was refused."""

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
