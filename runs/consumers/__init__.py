"""The WebSocket side of the site: its consumers (``sockets``) and what is sent to them
(``notices``: the groups they listen in and the notices they pass on).

Nothing is imported here: services reach ``notices`` without importing the consumers, which
call those services.
"""
