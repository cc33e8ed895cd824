from kvtui.cli import main

raise SystemExit(main())
