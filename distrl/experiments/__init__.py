"""Experiments: functions returning a complete config; variants call their parent and edit it.

``distrl/experiments/<recipe>.py`` holds one recipe's experiments (``default``, ``debug``, ...);
``--experiment NAME`` picks one. They live inside the package so an installed distrl (a wheel,
no checkout) runs ``--experiment debug`` too.
"""
