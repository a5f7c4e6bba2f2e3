"""The `poold` command line (entry point `poold.cli.main:main`)."""
