"""A forked child terminated by its parent must die of SIGTERM as without cprof (cprof run's
SIGTERM handler is for the profiled process only)."""
import multiprocessing as mp
import time


def work():
    time.sleep(30)


if __name__ == "__main__":
    p = mp.get_context("fork").Process(target=work)
    p.start()
    time.sleep(0.2)
    p.terminate()
    p.join()
    print("child exit", p.exitcode)
