package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// bar is one bar of a chart.
type bar struct {
	label string
	value float64
	unit  string
	color color.RGBA
}

var (
	rawColor   = color.RGBA{0x7f, 0x8c, 0x9d, 0xff}
	busColor   = color.RGBA{0x2e, 0x6f, 0xb5, 0xff}
	otherColor = color.RGBA{0xd0, 0x7a, 0x2e, 0xff}
	p99Color   = color.RGBA{0xb5, 0x3a, 0x3a, 0xff}
)

// barChart writes a horizontal bar chart with a title and labelled values
// to path as PNG.
func barChart(path, title string, bars []bar) error {
	const width, labelWidth, rowHeight, top = 900, 260, 26, 50
	height := top + rowHeight*len(bars) + 20
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	text(img, 20, 28, title)
	maxValue := 0.0
	for _, b := range bars {
		maxValue = max(maxValue, b.value)
	}
	for i, b := range bars {
		y := top + i*rowHeight
		text(img, 20, y+16, b.label)
		length := 0
		if maxValue > 0 {
			length = int(b.value / maxValue * float64(width-labelWidth-120))
		}
		draw.Draw(img, image.Rect(labelWidth, y+4, labelWidth+length, y+rowHeight-4), image.NewUniform(b.color), image.Point{}, draw.Src)
		format := "%.0f %s"
		if b.value < 100 {
			format = "%.2f %s"
		}
		text(img, labelWidth+length+8, y+16, fmt.Sprintf(format, b.value, b.unit))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func text(img *image.RGBA, x, y int, s string) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(color.Black), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
