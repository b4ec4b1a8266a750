import sys

from detbench.cli import main

sys.exit(main())
