from kvtui.cli.main import main

raise SystemExit(main())
