"""pytest plugin of the tests tier (runs inside branch environments, under pytest-xdist)."""
