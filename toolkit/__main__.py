from toolkit.console import main

main()
