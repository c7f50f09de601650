"""TODO metrics"""
