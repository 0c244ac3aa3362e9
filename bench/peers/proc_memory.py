"""proc_memory.py — the process memory figures the PyTorch peers report (imported by
torch_gpt.py and torch_lm.py; not a peer itself): the RSS high-water mark (VmHWM) and its
reset through /proc/self/clear_refs, so one process can report a peak per case."""


def peak_rss_bytes():
    """VmHWM of this process in bytes (0 where /proc has no figure)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss():
    """Set VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
