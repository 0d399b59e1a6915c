"""Code that runs *inside* the evaluation child process, next to untrusted candidate code.

Nothing here is imported by the caller's process except `launches` and `context`, which compile helpers use, and
`watchdog` (standard library only), whose report the parent reads.
"""
