"""TODO rebalance"""
