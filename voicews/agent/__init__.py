"""Voice agents: a language model's reply is spoken while it is still being written.

Two sides, one conversation (``conversation``: settings, bounded history, the reply kept as
heard). ``server`` is agent mode inside voicews: the model runs on the compute worker and a
``user_message`` gets a spoken reply. ``client`` runs the model next to the user instead
(``voicews.llm.local``) and streams each reply to a voicews session, with barge-in; ``sinks``
are where its audio goes. Nothing here loads a model at import time.
"""
