"""One case as a short standalone script and an upstream issue: collected in the session's venv
(collector), written (script, property_example), run and described (command, issue)."""
