"""TODO consumer"""
