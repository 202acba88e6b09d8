"""The process a stage runs in: SIGINT and SIGTERM turned into a clean stop that keeps what was
written (interrupts.py), and glibc's malloc told to keep freed memory for the next tensor of the
same size (allocator.py).

Imports: errors.
"""
