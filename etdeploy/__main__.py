from etdeploy.launch import main

main()
