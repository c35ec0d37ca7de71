"""mpiflow launch's reading of MPICH's output, every piece marked with its rank (no MPI)."""

from mpiflow.launch.job import _Pieces
from mpiflow.launch.launchers import LAUNCHERS


def read(*chunks):
    pieces = _Pieces(LAUNCHERS["mpich"].piece_marker)
    lines = [line for chunk in chunks for line in pieces.feed(chunk)]
    return lines + pieces.finish()


def test_pieces_of_interleaved_lines_are_put_back_together_per_rank():
    # What hydra wrote for two ranks each writing "ab", then "cd\n" in two writes.
    stream = b"\x020\x03ab\x021\x03ab\x020\x03cd\n\x021\x03cd\x021\x03\n"
    expected = [(0, b"abcd\n"), (1, b"abcd\n")]
    assert read(stream) == expected
    # However the reads cut it, markers included.
    for cut in range(1, len(stream)):
        assert read(stream[:cut], stream[cut:]) == expected, cut


def test_the_launchers_own_lines_and_unfinished_lines_at_the_end():
    lines = read(b"\x022\x0310%\r\x022\x0350%\rdone\n=== BAD TERMINATION\n", b"\x020\x03last")
    assert lines == [(2, b"10%\r"), (2, b"50%\r"), (2, b"done\n"),
                     (None, b"=== BAD TERMINATION\n"), (0, b"last\n")]
