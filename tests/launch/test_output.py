"""The launcher's output under stress: messages and forwarded lines from many threads stay whole,
and a signal that comes while the launcher writes a message is said too."""
import re
import subprocess
import sys

THREADS, MESSAGES = 8, 3000
STRESS = f"""\
import threading
from gluonkit.launch.output import forward, say

def talk(t):
    for i in range({MESSAGES}):
        say(f"thread {{t}} message {{i:05d}} " + "y" * 40 + f"\\n    its tail {{t}} {{i:05d}}")
        forward(f"role {{t}} line {{i:05d}} " + "z" * 40 + "\\n")
        forward(f"role {{t}} unterminated {{i:05d}}")

threads = [threading.Thread(target=talk, args=(t,)) for t in range({THREADS})]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""
WHOLE = re.compile(r"gluonkit\.launch: thread (\d) message (\d{5}) y{40}|    its tail (\d) (\d{5})|"
                   r"role \d line \d{5} z{40}|role \d unterminated \d{5}")


def test_messages_from_many_threads_keep_every_line_whole_and_together():
    result = subprocess.run([sys.executable, "-c", STRESS], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.split("\n")
    assert lines.pop() == ""                     # the output ends with a newline
    matches = [WHOLE.fullmatch(line) for line in lines]
    assert [line for line, match in zip(lines, matches) if not match] == []
    assert len(lines) == THREADS * MESSAGES * 4
    for before, match in zip(matches, matches[1:]):
        if match.group(3):                        # a message's second line follows its first
            assert before.group(1, 2) == match.group(3, 4)


LINES = 20000
PRINTER = f"""\
import os
if os.environ["DMLC_ROLE"] == "worker":
    for i in range({LINES}):
        print(f"worker {{os.environ['DMLC_TASK_ID']}} line {{i:06d}} " + "x" * 50)
"""


def test_the_workers_stdout_lines_reach_the_launchers_stdout_whole(tmp_path):
    # unbuffered: each print is two writes (the text, then the newline), from two workers at once
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "100",
                             "--env", "PYTHONUNBUFFERED=1", "--", sys.executable, "-c", PRINTER],
                            capture_output=True, text=True, timeout=150, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    malformed = [line for line in lines if not re.fullmatch(r"worker [01] line \d{6} x{50}", line)]
    assert malformed == [] and len(lines) == 2 * LINES


# stderr replaced by a stream that signals its own process in the middle of a write, as a second
# SIGTERM does when it comes while the launcher writes a message: the handler, on the same
# thread, says which signal came while the first message holds the output's lock
SCRIPT = """
import os, signal, sys
from gluonkit.launch.output import say

class Stream:
    def __init__(self):
        self.parts, self.signalled = [], False
    def write(self, text):
        self.parts.append(text)
        if not self.signalled:
            self.signalled = True
            os.kill(os.getpid(), signal.SIGUSR1)
    def flush(self):
        pass

stream = sys.stderr = Stream()
signal.signal(signal.SIGUSR1, lambda *_: say("SIGUSR1 received."))
say("stopping the workers first.")
sys.__stdout__.write("".join(stream.parts))
"""


def test_a_signal_handler_that_speaks_while_a_message_is_written_does_not_hang_the_launcher():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "gluonkit.launch: stopping the workers first.\ngluonkit.launch: SIGUSR1 received.\n"
