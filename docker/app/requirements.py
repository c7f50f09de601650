"""Print the pip requirements of setup.cfg (install_requires plus the named extras), one a line.

Used by docker/app/Dockerfile to install the dependencies in a layer of their own, before
the source is copied, so that a change to the code does not re-download them.

    python requirements.py setup.cfg spark
"""

from __future__ import annotations

import configparser
import sys
from typing import List


def requirements(setup_cfg: str, extras: List[str]) -> List[str]:
    """The requirement lines of ``install_requires`` and of each extra in ``extras`` (comments dropped)."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg)
    blocks = [parser["options"]["install_requires"]]
    blocks += [parser["options.extras_require"][extra] for extra in extras]
    lines = (line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line]


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
