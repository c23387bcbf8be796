"""One module per output, each registered once in `reports.registry.OUTPUTS`.

A module renders one output from its source (`reports.sources`): `render`
gives a file's text, `show` prints on stdout. Each delegates to a renderer of
`reports/` and imports it only when called, so the registry loads neither
rich nor jinja2.
"""
