"""The Kafka wire protocol: requests and responses, broker connections, message-set decoding (and its C accelerator).

May import: errors.
"""
