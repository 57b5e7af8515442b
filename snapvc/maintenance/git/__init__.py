"""snapvc history in git: export as a repository any git tool opens, import it back,
push it to a git remote (through dulwich; no ``git`` process runs).

``layout.py`` says how a state becomes files and back; ``export.py`` how commits,
branches and tags become git's, incrementally, and come back exactly; ``results.py``
what an export or an import reports. Use them through ``Repository.export_git``,
``Repository.import_git`` and ``snapvc.import_git`` (dulwich loads only then).
"""
