"""``python -m ddmrl.embedded data/download/s0 ...``: package the base models that download stages pre-trained."""

import sys

from ddmrl.embedded import add

for root in sys.argv[1:]:
    print(add(root), root)
