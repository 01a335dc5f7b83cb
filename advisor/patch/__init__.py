"""Source patches: a rule's fix written as an edit of the user's source (``@check.patch``), as opposed to a fix,
the change advisor makes at run time to a copy of the model (``rulekit/fixing.py``). The helpers rule authors
write patches with (``codemods``, ``cst_nodes``, ``common_sites``), the edits of one file made at once
(``edits``), which findings become the patch (``patch_plan``), ``--apply`` (``apply``) and what ``advisor fix`` hands
over (``summary``). A patched copy is measured by verification (``verify/patched_copy.py``)."""
