"""Structural diff (``changes``), applying changes and JSON Patch (``patch``), and
three-way merge with conflicts as values (``merge``). Pure functions of values and
lazy views: nothing here knows where objects are stored."""
