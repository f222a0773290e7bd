/* chisq.h — the chi-square distribution's upper quantile, for the tests' goodness-of-fit checks:
 * a threshold derived from the degrees of freedom and a chosen false-failure rate, never picked
 * by hand. tests/ */
#ifndef SWARM_CHISQ_H
#define SWARM_CHISQ_H

#include <math.h>

/* P(a, x), the regularised lower incomplete gamma function, by its series
 * e^-x x^a / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n)): every term positive, so it
 * converges for every x; 10^4 terms cover x up to a few thousand, far past what a test asks. */
static double chisq_lower_gamma(double a, double x)
{
    if (x <= 0)
        return 0;
    double term = 1, sum = 1;
    for (int n = 1; n < 10000; n++) {
        term *= x / (a + n);
        sum += term;
        if (term < sum * 1e-17)
            break;
    }
    double r = exp(-x + a * log(x) - lgamma(a + 1)) * sum;
    return r < 1 ? r : 1;
}

/* The t with P(chi-square of df degrees > t) = alpha, by bisection on the CDF (to 1e-9). */
static double chisq_quantile(int df, double alpha)
{
    double lo = 0, hi = df + 100.0 + 40.0 * sqrt((double)df);
    for (int i = 0; i < 200 && hi - lo > 1e-9; i++) {
        double mid = (lo + hi) / 2;
        if (1 - chisq_lower_gamma(df / 2.0, mid / 2) > alpha)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

#endif
