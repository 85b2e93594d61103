from etdeploy.cli import main

main()
