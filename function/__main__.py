from function.main import cli

cli(prog_name="function")
