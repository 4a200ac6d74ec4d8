import sys

from triton_release.cli import main

sys.exit(main())
