"""Kineto traces: the streaming reader, the parser, the trace model, rank summaries.
"""
