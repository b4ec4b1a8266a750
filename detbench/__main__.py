import sys

from detbench.cli.main import main

sys.exit(main())
