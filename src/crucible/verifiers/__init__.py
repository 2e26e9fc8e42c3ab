"""Verifiers: the in-sandbox script stage (Harbor semantics), then host-side stages."""
