"""Plugins that each break one startup rule; `base` holds what they share."""
