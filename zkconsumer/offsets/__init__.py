"""TODO offsets"""
