"""Process-level helpers: OS signals, listening sockets, ending the process.

- :mod:`.trap` the OS-signal trap of ``graceful serve`` (a second signal exits 1)
- :mod:`.sockets` closing listeners without resetting queued connections
- :mod:`.exit` ending the process even when a hook thread is hung, or without the final collections
"""
