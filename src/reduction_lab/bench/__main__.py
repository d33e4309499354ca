"""``python -m reduction_lab.bench ...``：与``reduction-lab``命令相同。"""

import sys

from .cli import main

sys.exit(main())
