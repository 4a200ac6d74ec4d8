import sys

from triton_release.cli.main import main

sys.exit(main())
