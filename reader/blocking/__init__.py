"""Synchronous handles over the async reader: what `reader.load`, `reader.torch`, `reader.safe_open`,
DCP's `StorageReader` and the vLLM loader stand on to be called from plain threads.

sync.py   run_sync (one coroutine to its end from synchronous code: the main thread's loop kept
          between calls, a loop of its own elsewhere), OpenOptions (the keywords each one-call form
          and handle hands `open_archive`), with_archive, and `reader.load`
loop.py   BackgroundLoop: an event loop in a daemon thread that a handle keeping an archive open
          owns; calls from any thread submitted to it
"""
