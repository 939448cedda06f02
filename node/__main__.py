from node.cli.main import main

raise SystemExit(main())
