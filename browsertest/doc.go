// Package browsertest drives postroom's web console in a real browser:
// Debian's Chromium, headless, through chromedp. It is a module of its own
// so that chromedp stays out of the library's go.mod; scripts/chromium.sh
// installs the browser.
package browsertest
