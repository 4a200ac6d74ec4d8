from triton_release.cli.main import script

script()
