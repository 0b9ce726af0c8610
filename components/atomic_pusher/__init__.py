"""Pusher whose version directories appear atomically (write elsewhere, then rename)."""
