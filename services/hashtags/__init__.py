"""The hashtags service: running count of every hashtag seen in ``tweets``."""
