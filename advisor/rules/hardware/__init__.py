"""Rules on the machine and its drivers: CPU quota and threads, steal time, a shared machine, throttled or shared
GPUs, the PCIe link."""
