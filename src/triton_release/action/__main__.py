import sys

from triton_release.action.main import main

sys.exit(main())
