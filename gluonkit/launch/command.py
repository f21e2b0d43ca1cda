"""The command line of ``gluonkit-launch`` (``python -m gluonkit.launch``): options, exit codes."""
import argparse
import signal
import sys

from ..arguments import OneLineParser
from ..commands import running_command
from .launcher import STOP_SECONDS, launch
from .output import say

__all__ = ["parse_args", "main"]

_DESCRIPTION = ("Launch a parameter-server job on MXNet's kvstore, on this machine or on several over ssh. "
                "Exit codes: 0 success, 1 a role failed, 124 timeout, 130/143 SIGINT/SIGTERM (to the launcher, or a "
                "worker that stopped on it), 2 bad arguments.")


def parse_args(argv):
    """The options of ``argv`` (a list of str, without the program name) as a namespace."""
    parser = OneLineParser(prog=running_command() or "python -m gluonkit.launch", description=_DESCRIPTION,
                           allow_abbrev=False)
    job = parser.add_argument_group("job")
    job.add_argument("-n", "--num-workers", type=int, required=True, help="number of workers")
    job.add_argument("-s", "--num-servers", type=int, help="number of servers (default: as many as workers)")
    job.add_argument("--timeout", type=float, help="seconds before every process is ended (exit code 124)")
    job.add_argument("--max-restarts", type=int, default=0, metavar="N",
                     help="when a role fails, end every role and start the job again, at most N times; the "
                          "roles find the attempt in GLUONKIT_LAUNCH_ATTEMPT and the recipes resume by themselves "
                          "(default 0). A worker that stops on SIGINT/SIGTERM (exit code 130/143, as fit does after "
                          "its checkpoint) is no failure: it ends the job")
    job.add_argument("--min-workers", type=int, metavar="M",
                     help="with --max-restarts: when a worker is lost (killed by a signal, or its host stops "
                          "answering ssh), restart on the workers that remain, at least M (fewer ends the job); "
                          "the workers left out return at a later restart if their host answers (default: "
                          "every restart runs -n workers)")
    job.add_argument("--stop-timeout", type=float, default=STOP_SECONDS, metavar="SECONDS",
                     help="on SIGINT/SIGTERM, seconds the workers get to finish their step and write their "
                          "checkpoints before the servers and the scheduler are ended (default %(default)g)")
    where = parser.add_argument_group("where")
    where.add_argument("--launcher", default="local", choices=["local", "ssh"])
    where.add_argument("-H", "--hostfile", help="ssh: hosts, one per line (host, host:port, user@host:port)")
    where.add_argument("--host-ip", help="scheduler address (default 127.0.0.1 for local, found for ssh)")
    where.add_argument("--port", type=int, help="scheduler port (default: a free one of 9091-9999)")
    where.add_argument("--ssh-config", help="ssh: configuration file for the ssh client (ssh -F)")
    run = parser.add_argument_group("environment")
    run.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                     help="set (or pass on this machine's) NAME in every role; repeatable. For a secret, export it "
                          "and give NAME alone: this command line is visible to every user (ps)")
    run.add_argument("--env-worker", action="append", default=[], metavar="NAME[=VALUE]", help="workers only")
    run.add_argument("--env-server", action="append", default=[], metavar="NAME[=VALUE]", help="servers only")
    run.add_argument("--workdir", help="directory the roles run in (default: the current one)")
    run.add_argument("--sync-dst-dir", help="ssh: copy the current directory there on every host and run there")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    for flag, value in (("-n/--num-workers", args.num_workers), ("-s/--num-servers", args.num_servers)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1, got {value}.")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be at least 0, got {args.max_restarts}.")
    if args.min_workers is not None and not 1 <= args.min_workers <= args.num_workers:
        parser.error(f"--min-workers must be from 1 to -n/--num-workers ({args.num_workers}), got {args.min_workers}.")
    if args.min_workers is not None and not args.max_restarts:
        parser.error(f"--min-workers {args.min_workers} needs --max-restarts 1 or more: the job continues on fewer "
                     "workers only at a restart.")
    if not args.stop_timeout >= 0:
        parser.error(f"--stop-timeout must be a number of seconds >= 0, got {args.stop_timeout:g}.")
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def main(argv=None):
    """Command-line entry point; returns the exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_signal)   # clean up on the way out
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return launch(args.command, args.num_workers, args.num_servers, args.launcher, args.hostfile, args.timeout,
                      args.host_ip, args.env, args.env_worker, args.env_server, args.workdir, args.sync_dst_dir,
                      args.ssh_config, args.stop_timeout, args.port, args.max_restarts, args.min_workers)
    except ValueError as err:
        say(str(err))
        return 2
    except RuntimeError as err:
        say(str(err))
        return 1
    except KeyboardInterrupt:
        say("interrupted.")
        return 128 + signal.SIGINT
    except SystemExit as stop:
        say("stopped.")
        return stop.code


def _on_signal(signum, frame):
    """Say which signal came, then unwind: the launch ends its processes on the way out."""
    name = signal.Signals(signum).name
    say(f"{name} received.")
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)
