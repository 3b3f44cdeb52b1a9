# awk functions the benchmark scripts share: awk -f scripts/numbers.awk -f PROGRAM.

# Sorts a[1..m] by value, in place (insertion sort: the lists are short).
function sort_numbers(a, m,    i, j, x) {
	for (i = 2; i <= m; i++)
		for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
}

# The median of a[1..m], which it sorts.
function median_of(a, m) {
	sort_numbers(a, m)
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
