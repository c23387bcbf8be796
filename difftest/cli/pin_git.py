"""Imported by the command line before any module that imports GitPython (issue #47).

`import git` runs `git version` at once, by name through PATH unless `GIT_PYTHON_GIT_EXECUTABLE`
names a program, and PATH holds folders the branches difftest runs can write (`~/.local/bin`).
Importing this module first points GitPython at the system's git, so not even that first command
runs a planted one. (`main` then checks that git exists: `build.refs.use_system_git`.)
"""

from difftest.core.host_tools import pin_gitpython_executable

pin_gitpython_executable()
