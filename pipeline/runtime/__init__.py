"""The process a stage runs in: SIGINT and SIGTERM turned into a clean stop that keeps what was
written (interrupts.py), glibc's malloc told to keep freed memory for the next tensor of the
same size (allocator.py), and Python's garbage collector told to skip what a training process keeps
alive (collector.py), and the libraries' informational lines sent to the command's log file
instead of the terminal (output.py).

Imports: errors.
"""
