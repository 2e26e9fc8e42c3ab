"""Dominant frequency of noisy synthetic signals, one FFT per signal.

Each signal is a sum of two sines (the first one stronger) plus Gaussian noise, drawn from
--seed; the program prints, per signal, the frequency of the largest peak of the one-sided
amplitude spectrum after the mean is removed.

    python spectral_peaks.py --n 4 --samples 256 --rate 128 --seed 0
"""

import argparse
import json

import numpy as np


def make_signal(rng, samples, rate):
    t = np.arange(samples) / rate
    f1, f2 = rng.uniform(2, rate / 4, size=2)
    x = 2.0 * np.sin(2 * np.pi * f1 * t) + 0.7 * np.sin(2 * np.pi * f2 * t)
    return x + 0.3 * rng.standard_normal(samples) + rng.uniform(-1, 1)


def peak_frequency(x, rate):
    x = np.asarray(x, dtype=float)
    spectrum = np.abs(np.fft.rfft(x - x.mean()))
    freqs = np.fft.rfftfreq(len(x), d=1.0 / rate)
    return float(freqs[int(np.argmax(spectrum))])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--rate", type=float, default=128.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    signals = [make_signal(rng, args.samples, args.rate) for _ in range(args.n)]
    peaks = [peak_frequency(x, args.rate) for x in signals]
    print(json.dumps({"peaks": [round(p, 6) for p in peaks]}))


if __name__ == "__main__":
    main()
