"""The tests tier's build steps: upstream tests from the sdist, test trees from git, test-only
packages, offline model stand-ins."""
