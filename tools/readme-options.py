#!/usr/bin/env python3
"""readme-options.py: rewrites README.md's runtime options table (between the
<!-- options: ... --> markers) from `mantissa options --markdown`, the one
table in engine/options.c. tests/integration/test_options.py fails while the
two differ. Usage: tools/readme-options.py [path/to/mantissa]"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "release", "mantissa")
md = subprocess.run([binary, "options", "--markdown"], capture_output=True, text=True,
                    check=True).stdout
path = os.path.join(ROOT, "README.md")
text = open(path).read()
new, n = re.subn(r"(<!-- options: generated[^\n]*-->\n).*?(<!-- options: end -->)",
                 lambda m: m.group(1) + md + m.group(2), text, flags=re.S)
if n != 1:
    sys.exit("README.md: no <!-- options: generated ... --> section")
if new != text:
    open(path, "w").write(new)
    print("README.md: options table rewritten")
