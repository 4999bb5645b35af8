"""Natural language to Ethereum transactions, executed on an Anvil node (``evm_server.py``)."""
