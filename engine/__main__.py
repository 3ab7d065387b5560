"""``python -m privcube`` is the ``privcube`` command."""
from privcube.cli import entry

entry()
