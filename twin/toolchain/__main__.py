"""`python -m twin.toolchain [MINOR ...]`: build what is missing (what `invoke twin-build` runs)."""

from twin.toolchain.build import main

raise SystemExit(main())
